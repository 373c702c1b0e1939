#!/usr/bin/env python3
"""The mailbox and signal walkthrough of docs/mailbox.md as one small script.

    python3 -m venv /tmp/demo && /tmp/demo/bin/pip install websockets
    /tmp/demo/bin/python scripts/mailbox-demo.py watch  http://127.0.0.1:8080 chat <id> <bearer> p2c
    /tmp/demo/bin/python scripts/mailbox-demo.py signal http://127.0.0.1:8080 chat <id> <bearer> primary

`watch` prints every `seq <n>` the relay sends for the direction (and pings every 20 s, which
marks the reader as in the foreground, so no push is sent meanwhile). `signal` opens one side
of the rendezvous, waits for `peer 1`, sends a frame typed on stdin per line, and prints the
frames the other side sends. Run it twice (primary and companion), in two terminals.
"""

import asyncio
import sys

import websockets


def url_of(base, app, mailbox, rest):
    return base.replace("http", "ws", 1).rstrip("/") + f"/v1/{app}/mailbox/{mailbox}/{rest}"


async def watch(base, app, mailbox, bearer, direction):
    url = url_of(base, app, mailbox, f"{direction}/watch")
    # The bearer as a subprotocol, as a browser would send it; the relay selects zerobyte.v1.
    async with websockets.connect(url, subprotocols=["zerobyte.v1", f"zerobyte.bearer.{bearer}"]) as ws:
        print(f"watching {direction} (subprotocol {ws.subprotocol})", flush=True)

        async def pings():
            while True:
                await ws.send("ping")
                await asyncio.sleep(20)

        task = asyncio.create_task(pings())
        try:
            async for message in ws:
                if message != "pong":
                    print(message, flush=True)
        finally:
            task.cancel()


async def signal(base, app, mailbox, bearer, side):
    url = url_of(base, app, mailbox, f"signal/{side}")
    async with websockets.connect(
        url, subprotocols=["zerobyte.v1"], additional_headers={"Authorization": f"Bearer {bearer}"}
    ) as ws:
        print(f"{side}: connected, waiting for the other side", flush=True)
        loop = asyncio.get_running_loop()

        async def typed():
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return
                # Frames are opaque bytes to the relay; a real app seals them first.
                await ws.send(line.rstrip("\n").encode())

        task = asyncio.create_task(typed())
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    print(f"frame: {message.decode(errors='replace')}", flush=True)
                else:
                    print(message, flush=True)
        finally:
            task.cancel()
            print(f"{side}: closed ({ws.close_code} {ws.close_reason})", flush=True)


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("watch", "signal"):
        sys.exit(__doc__)
    kind, base, app, mailbox, bearer, which = sys.argv[1:]
    run = watch if kind == "watch" else signal
    try:
        asyncio.run(run(base, app, mailbox, bearer, which))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
