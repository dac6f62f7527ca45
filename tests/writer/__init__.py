"""Tests of fastdata.writer, one module per module of src/fastdata/writer (a package, so that
its conftest.py and module names may repeat those of other test folders)."""
