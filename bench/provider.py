"""Serve the notifications app's fake push provider for the benchmarks, with TCP_NODELAY on.

`python -m bench.provider --port P --latency-ms L`. The app's handler writes the headers and the
body of a response in two sends; on a keep-alive connection Nagle's algorithm then holds the body
back until the client ACKs the headers, and the client delays that ACK by up to 40 ms. Every
request after a connection's first would take ~40 ms more than the configured latency, which
would time the loopback stack rather than Weave or the baseline. A real provider answers without
that stall, so the benchmarks switch Nagle off (`disable_nagle_algorithm`, a standard
`socketserver.StreamRequestHandler` switch) and deepen the listen backlog, instead of editing the
app's server.
"""

import argparse

from notifications import fake_provider


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=int, default=0)
    args = parser.parse_args()
    fake_provider._Handler.disable_nagle_algorithm = True
    # socketserver's listen backlog is 5. Twenty or more workers' threads connecting at once overflow
    # it, and the kernel then resets some of those connections after the request went out: the app
    # records them as `unknown` and retries them only on the next sweep. A real provider has a deep backlog.
    fake_provider._Server.request_queue_size = 256
    server = fake_provider.FakePushProvider(port=args.port, latency_ms=args.latency_ms)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
