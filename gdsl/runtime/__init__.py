"""Runtime: binding programs to graphs, the trainer."""
