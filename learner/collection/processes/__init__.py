"""Collection's process form (`cluster.collectors` = K > 1): K collector processes, each with its own socket,
share of the actors and inference, writing its columns of each rollout into shared memory. pool.py is the
training process's side (the `CollectorPool`, seen by the training loop as one `Collection`), process.py one
collector process, pipe.py the typed messages between the two, shard.py a collector's part of a rollout and
how the parts merge."""
