"""Unit tests of fastdata.tune, one module per module of src/fastdata/tune (a package, so that
their names may repeat those of other test folders)."""
