"""Errors a user can act on: the CLI prints their message as one line and exits 2."""


class UserError(Exception):
    """A failure whose message alone tells the user what to fix."""


class NotBuilt(UserError):
    """A command of the contract whose implementation has not landed yet."""


def not_built(what: str, issue: int):
    """Handler for a contract command whose issue has not landed: says so, exits 2."""

    def handler(settings, args) -> int:
        raise NotBuilt(f"{what} is not built yet (issue #{issue})")

    return handler
