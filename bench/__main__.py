"""`python -m bench`: run every benchmark module in bench/ that defines main()."""

import importlib
import pkgutil

import bench


def main() -> None:
    modules = [m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_")]
    if not modules:
        print("No benchmarks yet.")
    for name in modules:
        module = importlib.import_module(f"bench.{name}")
        if hasattr(module, "main"):
            print(f"== bench.{name} ==")
            module.main()


if __name__ == "__main__":
    main()
