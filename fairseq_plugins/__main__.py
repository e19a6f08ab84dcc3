"""``python -m fairseq_plugins``: the options of every plugin component.

fairseq's ``--help`` is printed before model-, task- and criterion-specific
options are added to its parser, so it never lists them. This prints them,
generated from the same dataclasses fairseq uses, with defaults and help.

``python -m fairseq_plugins --markdown docs/options.md`` writes the same
options as a Markdown reference (one section per component, a table of
option / default / help). The file depends only on the dataclasses: no
terminal width, date or version enters it, so regenerating it after a change
of the configs is the whole update.
"""

import argparse
import os
import re
import sys


def components():
    """``[(title, config dataclass)]`` of every component, in the reference's order (imports
    fairseq and the components, which registers them)."""
    from fairseq_plugins.criterions.infinite_former_kl import InfiniteFormerKLConfig
    from fairseq_plugins.models.fastformer import FastformerConfig
    from fairseq_plugins.models.fastformer_lm import FastformerLMConfig
    from fairseq_plugins.models.infinite_former_gpt2 import InfiniteFormerGPT2Config
    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLMConfig
    from fairseq_plugins.models.infinite_former_summarizer import InfiniteFormerSummarizerConfig
    from fairseq_plugins.tasks.streaming_language_modeling import StreamingLanguageModelingConfig

    return [
        ("model infinite_former_lm (--arch infinite_former_lm | infinite_former_lm_wiki103 | "
         "infinite_former_lm_gpt2_small | compressive_transformer_lm)", InfiniteFormerLMConfig),
        ("model infinite_former_gpt2 (--arch infinite_former_gpt2 | infinite_former_gpt2_medium | "
         "infinite_former_gpt2_large | infinite_former_gpt2_xl)", InfiniteFormerGPT2Config),
        ("task streaming_lm (--task streaming_lm)", StreamingLanguageModelingConfig),
        ("criterion infinite_former_kl (--criterion infinite_former_kl)", InfiniteFormerKLConfig),
        ("model fastformer_lm (--arch fastformer_lm | fastformer_lm_tiny | fastformer_lm_base)", FastformerLMConfig),
        ("model fastformer (--arch fastformer | fastformer_tiny | fastformer_base)", FastformerConfig),
        ("model infinite_former_summarizer (--arch infinite_former_summarizer | infinite_former_summarizer_base)",
         InfiniteFormerSummarizerConfig),
    ]


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` unless the help already states the default
    (options whose default is interpolated from another option)."""

    def _get_help_string(self, action):
        if "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


INTRO = ("Options added by fairseq-longmem; pass them to fairseq-train / fairseq-eval-lm / "
         "fairseq-generate together with --user-dir fairseq_plugins.")
MARKDOWN_COMMAND = "python -m fairseq_plugins --markdown docs/options.md"


def _component_parser(title, config):
    """One parser per component: options shared by name (e.g. --dropout) show under each."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    parser = argparse.ArgumentParser(prog=title, add_help=False, usage=argparse.SUPPRESS,
                                     formatter_class=_DefaultsFormatter)
    group = parser.add_argument_group(title)
    gen_parser_from_dataclass(group, config())
    return parser, group


def print_listing():
    print(INTRO + "\n")
    for title, config in components():
        parser, _ = _component_parser(title, config)
        parser.print_help()
        print()


def _cell(text):
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default_cell(action):
    help_text = " ".join((action.help or "").split())
    if action.default is None and "default:" in help_text:
        # the default is interpolated from another option (e.g. the task's
        # --tokens-per-sample) and the help says so: show what it says
        stated = help_text.rsplit("default:", 1)[1].strip()
        if stated.count(")") > stated.count("("):
            stated = stated[:stated.rindex(")")].strip()
        return _cell(stated)
    if action.default is None:
        return "—"  # none, or required
    default = action.default
    if isinstance(default, (list, tuple)):
        default = ",".join(map(str, default))
    return "`" + _cell(default) + "`" if str(default) != "" else "`\"\"`"


def _help_cell(action):
    text = action.help or ""
    if action.choices is not None:
        text = text.rstrip() + " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return _cell(text) if text.strip() else "—"


def _option_cell(action):
    if not action.option_strings:
        return f"`{action.dest}` (positional)"
    names = " ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs != 0:  # takes a value (flags have nargs 0)
        names += " *value*"
    return names


def _slug(text):
    return re.sub(r"[^a-z0-9_ -]", "", text.lower()).strip().replace(" ", "-")


def markdown_reference():
    """The option reference as Markdown text (deterministic)."""
    lines = [
        "# Options",
        "",
        f"Generated by `{MARKDOWN_COMMAND}` from the configuration dataclasses, "
        "with fairseq's `gen_parser_from_dataclass`; do not edit by hand, rerun the command.",
        "",
        INTRO + " `python -m fairseq_plugins` prints the same options as plain text.",
        "",
        "Options shared by name (e.g. `--dropout`) are listed under every component that "
        "declares them. A flag (no *value*) switches its setting to the opposite of the default.",
        "",
    ]
    sections = []
    for title, config in components():
        name, _, selected = title.partition(" (")
        selected = selected[:-1] if selected.endswith(")") else selected
        sections.append((name, selected, config))
    for name, _, _ in sections:
        lines.append(f"- [{name}](#{_slug(name)})")
    lines.append("")
    for name, selected, config in sections:
        _, group = _component_parser(name, config)
        lines += [f"## {name}", ""]
        if selected:
            lines += ["Selected with " + " or ".join(
                f"`{s.strip()}`" if s.strip().startswith("--") else f"`--arch {s.strip()}`"
                for s in selected.split("|")) + ".", ""]
        lines += ["| option | default | help |", "|---|---|---|"]
        for action in group._group_actions:
            lines.append(f"| {_option_cell(action)} | {_default_cell(action)} | {_help_cell(action)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None, prog="python -m fairseq_plugins"):
    from fairseq_plugins.lab.common.cli import ArgumentParser

    parser = ArgumentParser(
        prog=prog,
        description="List the options of every fairseq-longmem component.")
    parser.add_argument("--markdown", metavar="FILE",
                        help="write the option reference as Markdown to FILE "
                             f"(the repository's copy: {MARKDOWN_COMMAND})")
    args = parser.parse_args(argv)
    import fairseq_plugins

    fairseq_plugins.load_components()
    if args.markdown is None:
        try:
            print_listing()
            sys.stdout.flush()
        except BrokenPipeError:  # `python -m fairseq_plugins | head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    from fairseq_plugins.lab.common.files import text_writer, write_atomically

    write_atomically({args.markdown: text_writer(markdown_reference())})
    print(f"wrote {args.markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
