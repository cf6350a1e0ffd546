"""The PPO update, the thread that runs it, and the ranks of a data-parallel job."""
