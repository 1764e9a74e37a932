"""Thousands of tunnel ends at once never crowd out a signal.

A pause or the kill switch ends every tunnel together: two splice threads a call, each
telling the event loop it ended. Told one `call_soon_threadsafe` each, they filled the
loop's self-pipe (also the signal wake-up descriptor), SIGTERM's byte was dropped with
"Exception ignored when trying to write to the signal wakeup fd", and the helper would
not stop when told (test_errors_attacks N10 caught the line on a busy machine). The ends
now reach the loop in batches (lnk_common.wire._Ended). Real threads, a real signal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

from lnk_common import wire

ENDS = 4000  # twice a 1,000-call pause's, each direction of each tunnel one


def test_a_flood_of_tunnel_ends_while_the_loop_is_busy_loses_no_signal() -> None:
    async def scenario() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        termed = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR1, termed.set)
        futures = [loop.create_future() for _ in range(ENDS)]
        threads = [threading.Thread(target=wire._ENDED.put, args=(loop, done, index))
                   for index, done in enumerate(futures)]
        # The loop busy (as closing 1,000 calls keeps it) while every end comes in.
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)
        try:
            await asyncio.wait_for(termed.wait(), 30)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        return termed.is_set(), sum(done.result() for done in futures)

    termed, total = asyncio.run(scenario())
    assert termed
    assert total == sum(range(ENDS))  # every end settled, with its own count
