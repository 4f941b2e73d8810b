"""The Docker-free sandbox backend: bubblewrap namespaces over exported root filesystems.

`rootfs` exports an image once into a cache; `box` runs one sandbox (a bwrap whose PID 1 ends
after the lifetime, commands entered with nsenter); `sandbox`, `farm` and `grading` give it the
`Sandbox`, `Farm` and `Grader` protocols of `envs/protocol.py`.
"""
