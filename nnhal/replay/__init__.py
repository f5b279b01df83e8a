"""Record & replay: a recording's HAL calls replayed against any server (``nnhal replay``).

Recordings are made by ``nnhal serve --record DIR`` (``nnhal.server.recorder``); their
format is ``nnhal.core.recording``. :class:`~nnhal.replay.player.Player` replays one.
"""

from nnhal.replay.player import Difference, Latency, Player, Report

__all__ = ["Difference", "Latency", "Player", "Report"]
