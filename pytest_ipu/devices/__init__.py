"""Devices: the placement request, the IPUs present and which IPUs each instance gets."""
