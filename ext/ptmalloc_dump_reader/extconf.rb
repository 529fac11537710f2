# frozen_string_literal: true

# ptmalloc_dump_reader.so: what reads, compares and renders dumps, loaded on first use (its sources
# are ext/ptmalloc_dump's: sources.rb lists them).
require_relative "../ptmalloc_dump/build"

check_platform
# The heap maps are drawn by libpng.
unless have_header("png.h") && have_library("png", "png_create_write_struct")
  fail_with("libpng is missing: install libpng-dev (Debian/Ubuntu) or libpng-devel (Fedora/RHEL)")
end
set_flags
use_sources(:reader)
create_makefile("ptmalloc_dump/ptmalloc_dump_reader")
append_tidy_after_install
