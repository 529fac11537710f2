# frozen_string_literal: true

# What reads dumps: the classes of the library ptmalloc_dump_reader.so (Format, Dump, Diff, RubyHeap,
# Render), loaded here on their first use, and their Ruby side. A worker that only dumps never loads
# this file.
require "ptmalloc_dump/ptmalloc_dump_reader"

require_relative "dump"
require_relative "ruby_heap"
require_relative "retainers"
require_relative "allocation_sites"
require_relative "diff"
