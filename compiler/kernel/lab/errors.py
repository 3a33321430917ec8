"""The lab's one error: a kernel that cannot be fetched, booted or reached."""


class LabError(RuntimeError):
    """Fetching, booting or talking to a lab kernel failed; the message says why, in
    one line."""
