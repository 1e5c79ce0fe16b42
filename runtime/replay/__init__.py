"""Record and replay: any trace becomes an offline, deterministic re-run (docs/replay.md).

:func:`load_recording` reads a run from a trace file; :class:`Replayer` plays it back as a
provider (and, with :meth:`Replayer.mock_tools`, its tool results); :func:`export_scenario`
turns it into a scenario file for the scripted provider; :func:`load_resume` and
:class:`Resumer` make a killed run go on from its trace (docs/resume.md).
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
from ._resume import INTERRUPTED_TEXT as INTERRUPTED_TEXT
from ._resume import Resumer as Resumer
from ._resume import ResumeState as ResumeState
from ._resume import load_resume as load_resume
from ._resume import workspace_changes as workspace_changes

__all__ = [
    "Divergence",
    "INTERRUPTED_TEXT",
    "RecordedAgent",
    "RecordedCall",
    "RecordedTurn",
    "Recording",
    "Replayer",
    "ResumeState",
    "Resumer",
    "export_scenario",
    "load_recording",
    "load_resume",
    "workspace_changes",
]
