# The quickstart task repositories hold their own pytest suites (some deliberately buggy, with
# the same file names in every repository): they run inside task containers, not in ours.
collect_ignore_glob = ["quickstart*"]
