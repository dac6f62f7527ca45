"""Unit tests of fastdata.sources.readers, one module per reader module."""
