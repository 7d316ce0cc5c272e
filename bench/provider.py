"""Serve the notifications app's fake push provider for the benchmarks.

`python -m bench.provider --port P --latency-ms L`. The fake itself turns Nagle off and keeps a deep
listen backlog (weave/testing/fake_http.py), so loopback stalls do not pollute the measurements.
"""

import argparse

from notifications.fake_provider import FakePushProvider


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=int, default=0)
    args = parser.parse_args()
    FakePushProvider(port=args.port, latency_ms=args.latency_ms).serve_until_interrupted("", lambda line: None)


if __name__ == "__main__":
    main()
