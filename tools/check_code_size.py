#!/usr/bin/env python3
"""Checks that the control plane's files and functions stay small enough to read
(docs/architecture.md "Size").

In daemon/coord, daemon/recovery, daemon/replan and daemon/persister (a folder that does not
exist is skipped) this script fails on

- a file of more than 800 lines: the fix is to split it by responsibility (one file per role);
- a C++ function whose body spans more than 120 lines, from the line of its opening brace to the
  line of its closing one (what clang-tidy's readability-function-size calls LineThreshold): the
  fix is to move its steps into named functions.

Functions are found with a brace matcher over the code with string literals (raw ones too),
character literals, comments and preprocessor lines blanked out, so a brace inside any of them
is not counted. A brace at namespace or class scope that follows a parameter list (and the
qualifiers, trailing return type or constructor initializer list that may come after it) opens a
function body; everything inside that body belongs to the function, so a lambda counts as part
of its enclosing function (a long lambda makes its function long: name it as a function
instead).

Usage: check_code_size.py [--root DIR] | --self-test
Exit status 0 clean, 1 a violation (each printed as file:line: what and the fix).
"""
import argparse
import contextlib
import io
import os
import re
import sys
import tempfile

SCOPE = ("daemon/coord", "daemon/recovery", "daemon/replan", "daemon/persister")
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inc")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120

# What may follow a function's parameter list before its body.
QUALIFIER = re.compile(r"(const|volatile|override|final|noexcept|mutable|try|&&|&|"
                       r"[A-Z][A-Z0-9_]*)\b|&&|&")
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "return"}
TYPE_KEYWORD = re.compile(r"(?:^|[\s;}>])(class|struct|union|enum)\b")


def blank_literals(text):
    """`text` with every comment, string, character literal and preprocessor line replaced by
    spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):  # a block comment may run on past the line
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        raw = re.match(r'R"([^()\\\s]{0,16})\(', text[i:i + 20])
        if raw and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and
                        text[i - 1] not in "uU8L"):
            end = text.find(")" + raw.group(1) + '"', i + raw.end())
            j = n if end < 0 else end + len(raw.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "'" and i > 0 and is_digit_separator(text, i):
            out.append(" ")
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def is_digit_separator(text, i):
    """Whether the quote at `i` separates digits of a number (1'000'000), not a char literal."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'."):
        j -= 1
    return j < i and text[j].isdigit()


def match_brace(code, i):
    """The index of the brace closing the one at `i` (len(code) when it is never closed)."""
    depth = 0
    for k in range(i, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


def last_paren_group(header):
    """(start, end) of the last top-level (...) of `header`, or None."""
    depth, end = 0, None
    for k in range(len(header) - 1, -1, -1):
        ch = header[k]
        if ch == ")":
            if depth == 0:
                end = k
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0 and end is not None:
                return k, end
            if depth < 0:
                return None
    return None


def split_init_list(header):
    """The header without a constructor's initializer list (`) : a_(x), b_{y}`)."""
    depth = 0
    for k, ch in enumerate(header):
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        elif ch == ":" and depth == 0:
            before, after = header[:k].rstrip(), header[k + 1:]
            if after.startswith(":") or header[k - 1:k] == ":":
                continue  # a scope operator
            if before.endswith(")") or re.search(r"\)\s*(noexcept|const)?\s*$", before):
                return before
    return header


def parameter_list(header):
    """(text before, text after) the parameter list of `header`, or None: the last top-level
    (...) that is not the argument list of a trailing `noexcept(...)`, `throw(...)` or
    annotation macro (`REFT_REQUIRES(mu_)`); a trailing return type is dropped first."""
    h = re.sub(r"\)\s*->[^()]*$", ")", split_init_list(header.strip()))
    end = len(h)
    while True:
        group = last_paren_group(h[:end])
        if group is None:
            return None
        start, close = group
        word = re.search(r"(\w*)\s*$", h[:start]).group(1)
        qualifier = word in ("noexcept", "throw") or re.fullmatch(r"[A-Z][A-Z0-9_]*", word or "a")
        if qualifier and last_paren_group(h[:start - len(word)].rstrip()) is not None:
            end = start - len(word)
            continue
        return h[:start], h[close + 1:]


def is_function_header(header):
    """Whether `header` (the code since the last `;`, `{` or `}` at this scope, up to a `{`) is
    the head of a function definition."""
    parts = parameter_list(header)
    if parts is None:
        return False
    head, tail = parts[0].split(), parts[1]
    if not head or re.sub(r".*[^\w~]", "", head[-1]) in CONTROL:  # `Foo::Bar` -> `Bar`
        return False
    # noexcept(...), REFT_REQUIRES(mu_): strip argument lists, then the qualifiers.
    while True:
        stripped = re.sub(r"\b(noexcept|throw|[A-Z][A-Z0-9_]*)\s*\([^()]*\)", " ", tail)
        if stripped == tail:
            break
        tail = stripped
    return QUALIFIER.sub(" ", tail).strip() == ""


def function_name(header):
    parts = parameter_list(header)
    head = parts[0].split() if parts else []
    if not head:
        return "?"
    name = head[-1].lstrip("*&") or "?"
    if len(head) > 1 and head[-2].endswith("operator"):
        name = head[-2].lstrip("*&") + " " + name
    return name


def functions(code):
    """(name, first line, last line) of every function body in `code` (blanked)."""
    found = []

    def scan(lo, hi):  # a namespace or class body: code[lo:hi]
        header_start = lo
        k = lo
        while k < hi:
            ch = code[k]
            if ch in ";}":
                header_start = k + 1
            elif ch == "{":
                header = code[header_start:k]
                close = match_brace(code, k)
                if re.search(r"[\w>]\s*$", header) and split_init_list(header.strip()) != header.strip():
                    k = close  # a brace initializer in a constructor's initializer list
                elif is_function_header(header):
                    first = code.count("\n", 0, k) + 1
                    last = code.count("\n", 0, close) + 1
                    found.append((function_name(header), first, last))
                    k, header_start = close, close + 1
                elif re.search(r"\bnamespace\b|\bextern\b", header) or \
                        (TYPE_KEYWORD.search(" " + header) and "=" not in header):
                    scan(k + 1, close)
                    k, header_start = close, close + 1
                else:
                    k = close  # an initializer (`= {...}`) or an enum's list: no function
                    if not re.search(r"=\s*$", header):
                        header_start = close + 1
            k += 1

    scan(0, len(code))
    return found


def check_file(rel, text):
    problems = []
    if not rel.startswith(tuple(folder + "/" for folder in SCOPE)):
        return problems
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_FILE_LINES:
        problems.append(f"{rel}:{MAX_FILE_LINES + 1}: the file has {lines} lines (at most "
                        f"{MAX_FILE_LINES}): split it by responsibility, one file per role")
    if rel.endswith(SOURCE_EXT):
        for name, first, last in functions(blank_literals(text)):
            size = last - first + 1
            if size > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{first}: function {name} has {size} lines (at most "
                                f"{MAX_FUNCTION_LINES}, lambdas included): move its steps into "
                                f"named functions")
    return problems


def source_files(root):
    for top in SCOPE:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue  # a component that does not exist yet
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    path = os.path.join(dirpath, f)
                    yield os.path.relpath(path, root), path


def check(root):
    problems, count = [], 0
    for rel, path in source_files(root):
        count += 1
        with open(path, encoding="utf-8", errors="replace") as fh:
            problems += check_file(rel, fh.read())
    for p in problems:
        print(p)
    if problems:
        print(f"FAILED: {len(problems)} file(s) or function(s) too long in {count} files of "
              f"{', '.join(SCOPE)}")
        return 1
    print(f"code size ok: {count} files, each at most {MAX_FILE_LINES} lines, every function at "
          f"most {MAX_FUNCTION_LINES}")
    return 0


def body(lines):
    return "".join(f"  x += {i};\n" for i in range(lines))


def self_test():
    """Each rule must fire on its violation and stay quiet on the fix; braces the matcher must
    not count must not move a function's end."""
    long_fn = "int F(int x) {\n" + body(119) + "}\n"      # 121 lines
    ok_fn = "int F(int x) {\n" + body(118) + "}\n"        # 120 lines
    cases = [
        ("daemon/coord/src/a.cc", "x;\n" * 801, "the file has 801 lines"),
        ("daemon/replan/src/a.cc", long_fn, "function F has 121 lines"),
        ("daemon/recovery/src/a.cc", "namespace a {\nnamespace {\n" + long_fn + "}\n}\n",
         "a.cc:3: function F has 121"),
        # A lambda is part of its function.
        ("daemon/replan/src/a.cc",
         "void G() {\n  auto f = [&] {\n" + body(118) + "  };\n}\n", "function G has 122"),
        # Inline in a class, with qualifiers, an annotation and a trailing return type.
        ("daemon/coord/a.h", "class C {\n public:\n  auto F() const REFT_REQUIRES(mu_) -> int {\n" +
         body(119) + "  }\n};\n", "function F has 121"),
        # A constructor with an initializer list that uses braces.
        ("daemon/coord/a.cc", "C::C(int a) : a_(a), b_{a, 2}, c_{} {\n" + body(119) + "}\n",
         "function C::C has 121"),
        # Braces in strings, raw strings, chars and comments do not close the function early.
        ("daemon/replan/a.cc", 'int F() {\n  s = "}"; c = \'}\'; r = R"x(})x"; // }\n  /* } */\n' +
         body(117) + "}\n", "function F has 121"),
        ("daemon/persister/a.cc", "struct S {\n  void Run() noexcept(true) override {\n" + body(119) +
         "  }\n};\n", "function Run has 121"),
    ]
    clean = [
        ("daemon/coord/src/a.cc", "x;\n" * 800),
        ("daemon/replan/src/a.cc", ok_fn),
        ("daemon/net/src/a.cc", long_fn),               # not a checked folder
        ("daemon/coord/src/a.cc", 'int F() {\n  s = "{{{"; c = \'{\'; n = 1\'000;\n' + body(117) +
         "}\nint G() { return 1; }\n"),
        # Initializers and enums at namespace scope are no functions, however long.
        ("daemon/coord/src/a.cc", "const int kTable[] = {\n" + "  1,\n" * 130 + "};\n"),
        ("daemon/coord/src/a.cc", "enum class E {\n" + "  k,\n" * 130 + "};\n"),
        ("daemon/coord/src/a.cc", "#define M(x) { \\\n  x; }\n" + ok_fn),
        ("daemon/coord/a.h", "class C : public B<(1 > 0)> {\n" + ok_fn + "};\n"),
    ]
    for rel, text, want in cases:
        got = check_file(rel, text)
        if not any(want in p and p.startswith(rel + ":") for p in got):
            print(f"self-test FAILED: {rel}: {text[:60]!r}... gave {got}, wanted '{want}'")
            return 1
    for rel, text in clean:
        got = check_file(rel, text)
        if got:
            print(f"self-test FAILED: {rel}: {text[:60]!r}... was refused: {got}")
            return 1
    # The two functions of one file are told apart, each with its own first line.
    got = functions(blank_literals("int A() {\n}\nvoid B(int x) const {\n  if (x) { y(); }\n}\n"))
    if got != [("A", 1, 2), ("B", 3, 5)]:
        print(f"self-test FAILED: two functions gave {got}")
        return 1
    # And over a tree: the walk finds a violation and skips a missing folder (no persister).
    with tempfile.TemporaryDirectory(prefix="reft-size-") as tmp:
        os.makedirs(os.path.join(tmp, "daemon", "coord", "src"))
        with open(os.path.join(tmp, "daemon", "coord", "src", "a.cc"), "w", encoding="utf-8") as fh:
            fh.write(long_fn)
        with contextlib.redirect_stdout(io.StringIO()):
            rc = check(tmp)
        if rc != 1:
            print("self-test FAILED: a tree with a 121-line function passed")
            return 1
    print("self-test passed: long files and long functions (lambdas included) fail, braces in "
          "literals and comments are not counted, initializers are no functions")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                   "..")))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return check(os.path.abspath(args.root))


if __name__ == "__main__":
    sys.exit(main())
