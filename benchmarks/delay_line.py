"""A TCP delay line for the WAN benchmark: every byte is forwarded ``--delay-ms`` after it arrived, both directions.

    python benchmarks/delay_line.py --listen 10.79.1.1:5555 --listen 10.79.2.1:5555 --to 127.0.0.1:5555 \
        --delay-ms 10

Used by benchmarks/wan.py where the kernel has no ``sch_netem`` (``tc qdisc add ... netem`` answers "Specified
qdisc kind is unknown"): the link *rate* is still shaped in the kernel (``tc ... tbf`` on both ends of each veth
link), only the one-way propagation delay is added here. Each accepted connection gets its own upstream
connection; each direction is a queue of (arrival time + delay, bytes) read as it arrives and written when its
time has come, so the delay does not cut the throughput (up to ``QUEUE_CHUNKS`` reads in flight per direction,
then the reader waits: back-pressure instead of unbounded memory). An end-of-stream is forwarded, delayed like
the data. Not a faithful TCP model (each side's TCP sees the relay's short RTT, not the end-to-end one): what it
gives the protocol is the delay of every message and every round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import socket

QUEUE_CHUNKS = 256
READ_BYTES = 65536


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

    async def read() -> None:
        while True:
            try:
                data = await reader.read(READ_BYTES)
            except (ConnectionError, OSError):
                data = b""
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                return

    await asyncio.gather(read(), write())


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _serve(listen: list[tuple[str, int]], to: tuple[str, int], delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*to)
        except OSError:
            writer.close()
            return
        _nodelay(writer)
        _nodelay(up_writer)
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay))
        for w in (writer, up_writer):
            w.close()

    servers = [await asyncio.start_server(handle, host, port) for host, port in listen]
    print("delay line ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", action="append", required=True, help="HOST:PORT to accept on (repeatable)")
    ap.add_argument("--to", required=True, help="HOST:PORT every accepted connection is forwarded to")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay added in each direction")
    args = ap.parse_args()
    asyncio.run(_serve([_address(a) for a in args.listen], _address(args.to), args.delay_ms / 1e3))


if __name__ == "__main__":
    main()
