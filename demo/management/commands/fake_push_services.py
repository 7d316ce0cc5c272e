"""The FCM, APNs and Web Push fakes: `manage.py weave_fake_push --serve http2` under its older name (the chaos
run and the benchmarks use it)."""

from notifications.management.commands.weave_fake_push import Command as FakePush
from notifications.management.commands.weave_fake_push import follow_control as _follow

__all__ = ["Command", "_follow"]


class Command(FakePush):
    help = (
        "Run local fakes of FCM v1, APNs and a Web Push service (weave_fake_push --serve http2); writes the matching "
        "WEAVE PUSH_BACKENDS to <dir>/push_backends.json. Ctrl-C stops them."
    )
    serve_default = "http2"
