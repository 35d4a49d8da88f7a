"""The one exception type for expected tg-flash failures (the CLI prints it as `error: ...`)."""


class FlashError(RuntimeError):
    pass
