"""Socket-free protocol phases (layer: protocols): both sides of each protocol as message-in / messages-out state
machines, driven by the roles in :mod:`vfl.net`."""
