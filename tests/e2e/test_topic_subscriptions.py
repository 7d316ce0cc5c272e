"""FCM topic subscriptions on a real qcluster: the service's job is asked for on commit and run by the core's runner."""

import pytest
from django.contrib.auth import get_user_model

from notifications.models import Device, TopicSubscription
from notifications.services import device_register, topic_subscribe
from notifications.testing.push_fakes import PushFakes
from tools.processes import ProcessGroups, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_topic_job_runs_on_a_real_qcluster_against_the_fcm_fake(tmp_path, settings, worker_env):
    with PushFakes(tmp_path / "fakes") as fakes:
        backends = fakes.backends()
        settings.WEAVE = {**(settings.WEAVE or {}), "PUSH_BACKENDS": backends}
        env = {**worker_env, "WEAVE_PUSH_BACKENDS_FILE": str(fakes.write_backends())}
        user = get_user_model().objects.create_user("listener")
        live = device_register(user=user, backend="fcm", token=fakes.tokens("one")["fcm"])
        dead = device_register(user=user, backend="fcm", token=fakes.tokens("two", dead=True)["fcm"])
        with ProcessGroups(log_dir=tmp_path / "logs") as groups:
            cluster = groups.manage("qcluster", "qcluster", env=env)
            wait_until(lambda: "running." in cluster.log_tail(200), timeout=60, message="qcluster to start")
            (job,) = topic_subscribe(topic="news", devices=[live, dead])  # autocommit: asked for at once

            def finished() -> bool:
                assert cluster.alive(), cluster.log_tail()
                return TopicSubscription.objects.get(pk=job.pk).state == "done"

            wait_until(finished, timeout=60, message="the topic job to finish")
        assert fakes.fcm.iid.subscribers("news") == {live.token}
    row = TopicSubscription.objects.get(pk=job.pk)
    assert row.attempts == 1 and row.owner is None
    gone = Device.objects.get(pk=dead.pk)
    assert not gone.active and "NOT_FOUND" in gone.deactivation_reason
