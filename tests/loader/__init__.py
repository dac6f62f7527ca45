"""Unit tests of fastdata.loader, one module per module of src/fastdata/loader (a package, so
that their names may repeat those of other test folders)."""
