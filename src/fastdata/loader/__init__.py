"""The loader stage: :class:`fastdata.DataLoader` — torch's DataLoader plus resume, stats and
device transfer — its workers, and everything it needs of torch's DataLoader internals.

The modules, in the order a batch meets them: ``_arguments`` (what the loader takes),
``_loader`` (the class), ``_torch_iterators`` (torch's iterators with fastdata's hooks),
``_worker_side`` (what a worker does beside fetching: resume and report), ``_indices`` (a
map-style sampler's positions), ``_record`` (an epoch's facts), ``_resume`` (states made,
checked and planned; ``_resume_checks`` checks their sections), ``_streams`` (a fastdata
stream's part), ``_extras`` (the device stage and the consumer's wait), ``_install``
(fastdata's loader in torch's names), ``_gather`` (every rank's state on every rank).
"""

from fastdata.loader._gather import gather_state
from fastdata.loader._install import Installed, install_dataloader
from fastdata.loader._loader import DataLoader
from fastdata.loader._rng import worker_generator

__all__ = ["DataLoader", "Installed", "gather_state", "install_dataloader", "worker_generator"]
