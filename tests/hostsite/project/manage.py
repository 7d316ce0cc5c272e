#!/usr/bin/env python
"""manage.py of a stand-in host site: someone else's Django project that adds Weave's apps."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
