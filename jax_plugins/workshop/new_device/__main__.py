"""python -m jax_plugins.workshop.new_device NAME DIR [--force]: see the package docstring."""

import argparse
import sys

from . import __doc__ as _doc
from . import generate, size


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(
    prog="python -m jax_plugins.workshop.new_device",
    description=_doc,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  parser.add_argument("name", help="the platform name (also the package jax_plugins.NAME)")
  parser.add_argument("directory", help="where to write the project")
  parser.add_argument(
    "--force",
    action="store_true",
    help="overwrite files of an earlier project there (your edits are lost)",
  )
  args = parser.parse_args(argv)
  try:
    project = generate(args.name, args.directory, overwrite=args.force)
  except ValueError as e:
    parser.error(str(e))
  lines = size(project)
  print(
    f"wrote the {args.name} plugin project to {project} "
    f"({len(lines)} files, {sum(lines.values())} lines)"
  )
  print(
    f"next: cd {project} && python setup.py build_ext --inplace\n"
    f"      PYTHONPATH={project} python -m jax_plugins.workshop.teach.check --platform {args.name}"
  )


if __name__ == "__main__":
  sys.exit(main())
