"""Unit tests of fastdata.sources, one module per module of src/fastdata/sources (a package,
so that their names may repeat those of other test folders: test_files.py here and in
readers/)."""
