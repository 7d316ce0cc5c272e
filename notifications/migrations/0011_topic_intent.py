from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('weave_notifications', '0010_notification_finished_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='TopicIntent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('backend', models.CharField(help_text='The FCM alias in WEAVE["PUSH_BACKENDS"].', max_length=50)),
                ('registration', models.CharField(max_length=1024)),
                ('topic', models.CharField(max_length=900)),
                ('subscribed', models.BooleanField()),
                ('version', models.BigIntegerField(default=1)),
                ('applied_version', models.BigIntegerField(default=0)),
                ('updated_at', models.DateTimeField(blank=True, help_text='Database clock.', null=True)),
                ('applied_at', models.DateTimeField(blank=True, help_text='Database clock.', null=True)),
                ('last_result', models.CharField(blank=True, max_length=100)),
            ],
            options={
                'verbose_name': 'FCM topic intent',
                'constraints': [
                    models.UniqueConstraint(fields=('backend', 'registration', 'topic'), name='topic_intent_unique'),
                ],
            },
        ),
    ]
