"""Quick start: show which tg packages are installed and what each is for.

This grows with the libraries: once tg.tensor runs kernels, this example runs one.
"""

from importlib.metadata import metadata

PACKAGES = [
    "tg-codegen",
    "tg-drivers",
    "tg-hcq",
    "tg-tensor",
    "tg-flash",
    "tg-autogen",
    "tg-beam",
    "tg-replay",
    "tg-llm",
]


def main() -> None:
    for name in PACKAGES:
        info = metadata(name)
        print(f"{name:<11} {info['Version']:<7} {info['Summary']}")


if __name__ == "__main__":
    main()
