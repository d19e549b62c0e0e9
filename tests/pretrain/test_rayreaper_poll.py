"""The local Ray's watchdog (pretrain.rayreaper) polls the process table less often while
nothing new appears: every 0.5 s for a whole run it cost about an idle Ray worker's CPU."""

from __future__ import annotations

from pretrain import rayreaper


def test_the_poll_backs_off_while_nothing_new_appears_and_resets_when_something_does() -> None:
    waits, wait = [], rayreaper.POLL_S
    for grew in (True, False, False, False, False, False, True, False):
        wait = rayreaper.next_wait(wait, grew)
        waits.append(wait)
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 0.5, 1.0]
    assert rayreaper.MAX_POLL_S <= 4.0  # a process seen late is still recorded within seconds
