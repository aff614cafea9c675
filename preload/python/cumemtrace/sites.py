"""Who holds the memory, in words: allocations grouped by call stack, each
group named by its innermost Python frame (file:line), then the Python
frames of the code under test and a line of native frames."""
import os

from .sizes import format_size

# Frames of the test runner itself: shown as a count, not one by one.
_RUNNER_PARTS = (os.sep + "_pytest" + os.sep, os.sep + "pluggy" + os.sep, os.sep + "pytest" + os.sep,
                 os.sep + "xdist" + os.sep, os.sep + "execnet" + os.sep)
MAX_SITES = 5
MAX_PYTHON_FRAMES = 8
MAX_NATIVE_FRAMES = 3


def _is_runner(frame):
    return frame.python and any(part in frame.file for part in _RUNNER_PARTS)


def _short_path(path, root):
    if root and path.startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, root)
    return path


def python_label(frame, root=None):
    return "%s:%d in %s" % (_short_path(frame.file, root), frame.line, frame.function or "?")


def native_label(frame):
    module = os.path.basename(frame.file) if frame.file else "?"
    place = "%s+%s" % (module, frame.line) if frame.line else module
    return "%s (%s)" % (frame.function, place) if frame.function else place


def site_label(frames, root=None, test_file=None):
    """The innermost Python frame's file:line (else the innermost native
    frame's), and the test's own line that led there when that is another."""
    python = [f for f in frames if f.python]
    if not python:
        return native_label(frames[0]) if frames else "an unknown call stack (stacks off: CUMEMTRACE_STACKS=0?)"
    label = python_label(python[0], root)
    if test_file:
        own = next((f for f in python if os.path.normpath(f.file) == os.path.normpath(test_file)), None)
        if own is not None and own is not python[0]:
            label += ", called from %s" % python_label(own, root)
    return label


def describe_holders(api, allocations, total, root=None, test_file=None):
    """(one-line headline naming the largest holder's call site, detail lines)."""
    groups = {}
    for a in allocations:
        group = groups.setdefault(a.stack, [0, 0])
        group[0] += a.size
        group[1] += 1
    ordered = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    lines = []
    headline = None
    for stack_id, (nbytes, count) in ordered[:MAX_SITES]:
        frames = api.stack(stack_id)
        label = site_label(frames, root, test_file)
        headline = headline or label
        lines.append("%s in %d allocation%s at %s" % (format_size(nbytes), count, "" if count == 1 else "s", label))
        python = [f for f in frames if f.python]
        own = []
        for frame in python:
            if _is_runner(frame):
                break
            own.append(frame)
        for frame in own[:MAX_PYTHON_FRAMES]:
            lines.append("    %s" % python_label(frame, root))
        hidden = len(python) - min(len(own), MAX_PYTHON_FRAMES)
        if hidden > 0:
            lines.append("    (%d more Python frame%s, pytest's own among them)" % (hidden, "" if hidden == 1 else "s"))
        native = [f for f in frames if not f.python]
        if native:
            shown = " <- ".join(native_label(f) for f in native[:MAX_NATIVE_FRAMES])
            more = len(native) - MAX_NATIVE_FRAMES
            lines.append("    native: %s%s" % (shown, " <- ... (%d more)" % more if more > 0 else ""))
    others = len(ordered) - MAX_SITES
    if others > 0:
        lines.append("(and %d more call site%s)" % (others, "" if others == 1 else "s"))
    if total > len(allocations):
        lines.append("(%d smaller allocations not listed)" % (total - len(allocations)))
    return headline, lines
