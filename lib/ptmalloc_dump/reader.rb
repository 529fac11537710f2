# frozen_string_literal: true

# What reads dumps: the extension's classes (Format, Dump, Diff, RubyHeap, Render), defined here on
# their first use, and their Ruby side. A worker that only dumps never loads this file.
module PtmallocDump
  _define_reader
end

require_relative "dump"
require_relative "ruby_heap"
require_relative "retainers"
require_relative "allocation_sites"
require_relative "diff"
