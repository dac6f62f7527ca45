"""fastdata.tune: pick num_workers, the worker method, prefetch_factor and pin_memory by
measuring the consumer.

Guessing ``num_workers`` fails both ways: too few and the GPU waits for data, too many and
workers fight over cores and memory (32 workers can be slower than 4). :func:`tune` builds
candidate loaders, measures how busy they keep the consumer (:mod:`.measure`), screens the
settings coarse to fine and compares the cheap ones with the fastest in paired rounds
(:mod:`.search`, :mod:`.decide`), and returns a :class:`TuneResult` (:mod:`.report`) whose
config ``fastdata.DataLoader(config=...)`` accepts.

Importing this package is cheap (standard library only); torch and psutil load when
:func:`tune` runs.
"""

from fastdata.config import LoaderConfig
from fastdata.tune._consumer import SimulatedStep
from fastdata.tune._trial import Trial
from fastdata.tune._tune import tune
from fastdata.tune.report import TuneResult
from fastdata.tune.search import TuneError

__all__ = ["LoaderConfig", "SimulatedStep", "Trial", "TuneError", "TuneResult", "tune"]
