# TODO: return the whole batch's gradient on every device: average `grads` over every
# device of every process (this runs inside shard_map; the mesh axes are "proc" and
# "local"). As it stands, each device keeps its own shard's gradient.
return grads
