"""`tern chat` under a pseudo-terminal (Python's pty): the real binary on the
tiny model (its answers are random text, which is enough here). The answer
streams and ends with a status line; the conversation is kept, /reset
clears it, /system adds a system prompt; Ctrl-C stops an answer and not the
program; Ctrl-C at the prompt gives a new prompt; /exit exits 0."""

import os
import pty
import re
import select
import signal
import termios
import time

import pytest

from conftest import DATA

STATUS = re.compile(r"\[(\d+) tokens \(prompt (\d+)\), TTFT \d+ ms, [\d.]+ tokens/s(, stopped)?\]")


class Terminal:
    """A child process on a pseudo-terminal, read with expect()."""

    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(args[0], args)
        self.text = ""
        self.pos = 0
        self.status = None  # the wait status once the child has exited

    def read_some(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.text += data.decode("utf-8", errors="replace")
        return bool(data)

    def expect(self, pattern, timeout=30):
        """The first match of `pattern` after the previous one; fails after `timeout` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = regex.search(self.text, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0 or (not self.read_some(min(left, 0.2)) and self.exited()):
                m = regex.search(self.text, self.pos)
                if m:
                    self.pos = m.end()
                    return m
                pytest.fail(f"no {pattern!r} in the terminal's output:\n{self.text[self.pos:]}")

    def send(self, text):
        os.write(self.fd, text.encode())

    def exited(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is not None

    def wait(self, timeout=30):
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                pytest.fail("tern chat did not exit")
            self.read_some(0.1)
        return os.waitstatus_to_exitcode(self.status)

    def close(self):
        if not self.exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def chat(tern_bin):
    terminals = []

    def start(*flags):
        t = Terminal([tern_bin, "chat", str(DATA / "ernie-tiny"), "--temperature", "0", "--ignore-eos", *flags])
        terminals.append(t)
        t.expect(r"/exit")  # the help line
        t.expect(r"> ")
        return t

    yield start
    for t in terminals:
        t.close()


def ask(t, message):
    """Sends a message; returns (answer text, output tokens, prompt tokens, stopped)."""
    t.send(message + "\r")
    echo = t.expect(re.escape(message) + r"\r\n")
    status = t.expect(STATUS.pattern)
    # Typed before the editor took the terminal, the line is echoed twice (by the terminal, then the editor).
    answer = t.text[echo.start():status.start()].rsplit(message + "\r\n", 1)[-1].strip()
    t.expect(r"> ")
    return answer, int(status.group(1)), int(status.group(2)), bool(status.group(3))


def test_conversation_reset_system_and_exit(chat):
    t = chat("--max-tokens", "12")
    first, tokens, prompt, stopped = ask(t, "Hello there")
    assert first and tokens == 12 and not stopped
    second, _, prompt2, _ = ask(t, "And then?")
    assert prompt2 > prompt + tokens, "the first exchange is part of the second prompt"

    t.send("/reset\r")
    t.expect(r"conversation cleared")
    again, _, prompt3, _ = ask(t, "Hello there")
    assert prompt3 == prompt and again == first, "after /reset the same message gets the same greedy answer"

    t.send("/reset\r")
    t.send("/system You are a terse assistant.\r")
    t.expect(r"system prompt set")
    _, _, prompt4, _ = ask(t, "Hello there")
    assert prompt4 > prompt, "the system prompt is in the conversation"

    t.send("\x1b[A\r")  # the up arrow recalls the last line from the history
    t.expect(r"Hello there\r\n")
    t.expect(STATUS.pattern)
    t.expect(r"> ")
    t.send("/exit\r")
    assert t.wait() == 0


def test_ctrl_c_stops_the_answer_not_the_program(chat):
    t = chat("--threads", "1")  # an answer runs to the end of the 4096-token context unless stopped
    t.send("Write a long story\r")
    t.expect(r"Write a long story\r\n")
    t.expect(r"\S{8}")  # the answer is streaming
    t.send("\x03")
    status = t.expect(STATUS.pattern)
    assert status.group(3), "the status line says the answer was stopped"
    assert 0 < int(status.group(1)) < 4000
    t.expect(r"> ")
    time.sleep(0.2)  # as a person would: a signal before the terminal read starts cannot end it
    t.send("\x03")  # Ctrl-C at the prompt: a new prompt, not an exit
    t.expect(r"> ")
    t.send("/system Be brief.\r")
    t.expect(r"system prompt set")
    t.expect(r"> ")
    t.send("\x04")  # Ctrl-D on an empty line quits
    assert t.wait() == 0


def test_keys_typed_during_an_answer_wait_for_the_prompt(chat):
    """Keys typed while an answer streams are held as typed until the prompt after it: a line typed then is
    echoed once, at the prompt, and a Ctrl-D typed then still quits (in the terminal's own line mode it
    would become an end of file that reaches the line editor as a NUL)."""
    t = chat("--threads", "1", "--max-tokens", "4000")  # ~1 s of answer on this model
    t.send("Write a long story\r")
    t.expect(r"Write a long story\r\n")
    streaming = t.expect(r"\S{8}")
    t.send("/system Be brief.\r")  # typed during the answer
    status = t.expect(STATUS.pattern)
    assert int(status.group(1)) == 4000 and not status.group(3)
    assert "/system" not in t.text[streaming.end():status.start()], "not echoed while the answer streams"
    t.expect(r"system prompt set")
    t.expect(r"> ")
    t.send("Write a long story\r")
    t.expect(r"Write a long story\r\n")
    t.send("\x04")  # Ctrl-D as the answer starts (or as the editor hands the terminal over)
    t.expect(STATUS.pattern)
    assert t.wait() == 0
    assert line_mode_as_given(t.fd)


def line_mode_as_given(fd):
    """Whether the terminal is back in the line mode a pty starts in: line editing, echo, Ctrl-D as end of file."""
    attrs = termios.tcgetattr(fd)
    lflag, cc = attrs[3], attrs[6]
    return bool(lflag & termios.ICANON) and bool(lflag & termios.ECHO) and cc[termios.VEOF] == b"\x04"


def test_terminal_mode_comes_back_when_sigterm_ends_an_answer(chat):
    """SIGTERM during an answer (the keys held, no line editing, no echo) ends the program with the terminal
    back in its own mode."""
    t = chat("--threads", "1", "--max-tokens", "4000")
    t.send("Write a long story\r")
    t.expect(r"Write a long story\r\n")
    t.expect(r"\S{8}")
    os.kill(t.pid, signal.SIGTERM)
    assert t.wait() == -signal.SIGTERM
    assert line_mode_as_given(t.fd)
