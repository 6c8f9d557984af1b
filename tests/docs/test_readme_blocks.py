"""readme_blocks.parse: every marker kind, and every way a block can lack a usable one."""

import readme_blocks

README = """\
# Title

<!-- readme-test: run -->
```
echo hello
```

<!-- readme-test: run python timeout=600 -->

```python
print("hi")
```
<!-- readme-test: xfail the snippet needs a model (issue 42) -->
```python
model.fit()
```
<!-- readme-test: skip CI runs it -->
```sh
tools/test.sh
```
<!-- readme-test: xfail timeout=5 slow -->
```console
$ false
output line
$ true
```
````markdown
```
inner fence, not a block of its own
```
````
"""


def by_line(text):
    return {b.line: b for b in readme_blocks.parse(text)}


def test_every_marker_kind():
    blocks = by_line(README)
    assert sorted(blocks) == [4, 10, 14, 18, 22, 27]

    run = blocks[4]
    assert (run.action, run.language, run.info, run.code) == ("run", "sh", "", "echo hello\n")
    assert run.timeout_s == readme_blocks.DEFAULT_TIMEOUT_S and not run.error
    assert run.id == "readme-L4-sh"

    python = blocks[10]  # a blank line between marker and fence is allowed
    assert (python.action, python.language, python.timeout_s) == ("run", "python", 600)
    assert python.code == 'print("hi")\n' and python.id == "readme-L10-python"

    xfail = blocks[14]
    assert (xfail.action, xfail.language) == ("xfail", "python")
    assert xfail.reason == "the snippet needs a model (issue 42)"

    skip = blocks[18]
    assert (skip.action, skip.language, skip.reason) == ("skip", "sh", "CI runs it")

    console = blocks[22]
    assert (console.action, console.language, console.timeout_s) == ("xfail", "sh", 5)
    assert console.reason == "slow" and console.code == "false\ntrue\n"

    nested = blocks[27]  # a longer fence holds a shorter one; unmarked, so an error
    assert "inner fence" in nested.code and "no marker" in nested.error


def test_unmarked_block_is_an_error():
    text = "<!-- readme-test: run -->\n```\ntrue\n```\n\n```python\nprint(1)\n```\n"
    first, second = readme_blocks.parse(text)
    assert not first.error
    assert second.line == 6 and "no marker" in second.error and second.id == "readme-L6-python"


def test_marker_separated_by_prose_is_an_error():
    text = "<!-- readme-test: run -->\nSome prose.\n```\ntrue\n```\n"
    dangling, block = readme_blocks.parse(text)
    assert dangling.line == 1 and "not followed" in dangling.error
    assert dangling.id == "readme-L1-marker"
    assert "no marker" in block.error


def test_malformed_markers_are_errors():
    cases = {
        "<!-- readme-test: maybe -->": "unknown marker",
        "<!-- readme-test: -->": "unknown marker",
        "<!-- readme-test: run twice -->": "'run' takes only",
        "<!-- readme-test: xfail -->": "needs a reason",
        "<!-- readme-test: skip timeout=3 -->": "needs a reason",
        "<!-- readme-test: run timeout=soon -->": "bad timeout",
        "<!-- readme-test: run timeout=0 -->": "bad timeout",
    }
    for marker, message in cases.items():
        (block,) = readme_blocks.parse(f"{marker}\n```\ntrue\n```\n")
        assert message in block.error, (marker, block.error)


def test_language_comes_from_marker_or_fence():
    (toml,) = readme_blocks.parse("<!-- readme-test: run -->\n```toml\na = 1\n```\n")
    assert "cannot run a 'toml' block" in toml.error
    (skipped,) = readme_blocks.parse("<!-- readme-test: skip config -->\n```toml\na = 1\n```\n")
    assert not skipped.error and skipped.id == "readme-L2-toml"
    (forced,) = readme_blocks.parse("<!-- readme-test: run python -->\n```\nprint(1)\n```\n")
    assert forced.language == "python" and not forced.error
    (bash,) = readme_blocks.parse("<!-- readme-test: run -->\n```bash\ntrue\n```\n")
    assert bash.language == "sh"


def test_unclosed_fence_and_trailing_marker():
    (block,) = readme_blocks.parse("<!-- readme-test: run -->\n```\ntrue\n")
    assert "never closed" in block.error
    (dangling,) = readme_blocks.parse("text\n<!-- readme-test: run -->\n")
    assert dangling.line == 2 and "not followed" in dangling.error


def test_indented_fence_keeps_relative_indentation():
    text = ("- item\n  <!-- readme-test: run python -->\n"
            "  ```python\n  if True:\n      pass\n  ```\n")
    (block,) = readme_blocks.parse(text)
    assert not block.error and block.code == "if True:\n    pass\n"
