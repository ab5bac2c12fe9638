"""Environment adapters: Atari 100k, Crafter, MiniGrid and Memory Maze as Gymnasium envs.

They register through the plugin :mod:`wmzoo.envs.plugin`. Every env yields uint8 RGB
observations ``(3, size, size)`` and discrete actions; each suite's package is an optional
extra (``pip install "wmzoo[atari]"``) imported only when one of its envs is made.
"""
