# frozen_string_literal: true

# ptmalloc_dump.so: what `require "ptmalloc_dump"` loads, the dump (sources.rb lists its files).
require_relative "build"

check_platform
set_flags
use_sources(:capture)
create_makefile("ptmalloc_dump/ptmalloc_dump")
append_tidy_after_install
