"""Sources: ParquetStream, ImageStream (folders, file lists, Parquet, tar shards)
and the plan they share."""
