"""iptables' own word splitting and option reading (iptables/xshared.c
``add_param_to_argv``, ``do_parse``)."""

from __future__ import annotations

import pytest

from pfc.importers.iptables.dump import split_words
from pfc.importers.iptables.words import read_words
from pfc.importers.model import Refuse


def _texts(line: str) -> list[str]:
    return [w.text for w in split_words(line, 0)]


def test_quotes_and_escapes_as_iptables_restore_reads_them():
    assert _texts('-m comment --comment "ssh \\"in\\" here" -j ACCEPT') == [
        "-m", "comment", "--comment", 'ssh "in" here', "-j", "ACCEPT"]
    assert _texts('a"b c"d  e') == ["ab cd", "e"]
    assert _texts('--comment ""') == ["--comment", ""]


def test_words_keep_their_place_in_the_file():
    words = split_words('-A  INPUT "x y"', 100)
    assert [(w.start, w.end) for w in words] == [(100, 102), (104, 109), (110, 115)]
    assert words[2].quoted


def test_negation_before_and_after_the_option_and_implicit_modules():
    words = read_words(split_words("! -s 10.0.0.1 -p tcp --dport ! 22 -j DROP", 0), "f")
    assert words.general["-s"].negated
    (tcp,) = words.matches
    assert tcp.name == "tcp" and tcp.opts[0].negated and tcp.opts[0].value == "22"
    assert words.target.name == "DROP"


def test_general_options_after_the_target_are_still_general():
    words = read_words(split_words("-j RETURN -d 10.0.0.1", 0), "f")
    assert words.target.name == "RETURN" and words.general["-d"].value == "10.0.0.1"


def test_options_with_two_words():
    words = read_words(split_words("-p tcp --tcp-flags SYN,ACK SYN -m set --match-set "
                                   "bad src -j DROP", 0), "f")
    assert [o.value for m in words.matches for o in m.opts] == ["SYN,ACK SYN", "bad src"]


@pytest.mark.parametrize("line", ["-s", "--dport 22", "! ", "-j", "10.0.0.1"])
def test_what_iptables_would_not_take_is_refused(line):
    with pytest.raises(Refuse):
        read_words(split_words(line, 0), "f")


def test_an_option_goes_to_the_module_that_knows_it():
    """iptables: `-m state --state NEW --dport 22` loads tcp for `--dport`."""
    words = read_words(split_words("-p tcp -m state --state NEW --dport 22 -j ACCEPT", 0),
                       "f")
    assert [(m.name, [o.name for o in m.opts]) for m in words.matches] == [
        ("state", ["--state"]), ("tcp", ["--dport"])]
