"""Record and replay: any trace becomes an offline, deterministic re-run (docs/replay.md).

:func:`load_recording` reads a run from a trace file; :class:`Replayer` plays it back as a
provider (and, with :meth:`Replayer.mock_tools`, its tool results); :func:`export_scenario`
turns it into a scenario file for the scripted provider.
"""

from __future__ import annotations

from ._export import export_scenario as export_scenario
from ._recording import RecordedAgent as RecordedAgent
from ._recording import RecordedCall as RecordedCall
from ._recording import RecordedTurn as RecordedTurn
from ._recording import Recording as Recording
from ._recording import load_recording as load_recording
from ._replayer import Divergence as Divergence
from ._replayer import Replayer as Replayer

__all__ = [
    "Divergence",
    "RecordedAgent",
    "RecordedCall",
    "RecordedTurn",
    "Recording",
    "Replayer",
    "export_scenario",
    "load_recording",
]
