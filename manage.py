#!/usr/bin/env python
"""Django's command-line utility for the standalone Weave site."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A missing production setting is the operator's to fix, not a bug: say what, without a traceback.
        sys.stderr.write(f"ImproperlyConfigured: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
