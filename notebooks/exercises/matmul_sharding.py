# Your choice: the sharding of x, a PartitionSpec with one entry per dim of x (8x16).
x_spec = P()
