"""Speed: how long the simulator and a whole `servesim run` take, and what they hold in memory."""
