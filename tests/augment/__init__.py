"""Tests of fastdata.augment, one module per module of src/fastdata/augment (a package, so that
its conftest.py and module names may repeat those of other test folders)."""
