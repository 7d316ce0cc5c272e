from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("weave", "0003_jobs_and_tasks"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerReport",
            fields=[
                (
                    "name",
                    models.CharField(
                        help_text="host:pid of the worker process", max_length=200, primary_key=True, serialize=False
                    ),
                ),
                ("started_at", models.DateTimeField()),
                ("seen_at", models.DateTimeField(help_text="database time of the latest report")),
                (
                    "config",
                    models.JSONField(
                        default=dict, help_text="the WEAVE settings this process reads (numbers and flags)"
                    ),
                ),
            ],
            options={"verbose_name": "worker report"},
        ),
    ]
