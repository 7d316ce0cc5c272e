from django.db import models


class Notification(models.Model):
    """A host model named like Weave's, in an app with the label Weave's app would have taken."""

    text = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.text
