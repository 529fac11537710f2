# frozen_string_literal: true

require "mkmf"
require_relative "../ptmalloc_dump/makefile_tidy"

# The allocation tracker: a library for LD_PRELOAD (ptmalloc-dump --track), not a Ruby extension. It
# finds Ruby's profiling functions by name when the program has them, so it links nothing of Ruby's
# and can be preloaded into a shell or any other program a command starts.
$LIBRUBYARG = ""
$defs << "-D_GNU_SOURCE"
have_library("dl", "dlsym")
have_library("m", "log")
append_cflags(%w[-Wall -Wextra -std=gnu11 -fvisibility=hidden -Wno-missing-field-initializers
                 -fno-omit-frame-pointer])
# rake spec:sanitize: UndefinedBehaviorSanitizer, linked in (a preloaded library cannot count on the
# program having it). AddressSanitizer replaces malloc itself: with it the tracker has nothing to track.
if ENV["PTMALLOC_DUMP_SANITIZE"].to_s.split(",").include?("undefined")
  append_cflags(%w[-fsanitize=undefined -fno-sanitize-recover=undefined -g])
  $LDFLAGS << " -fsanitize=undefined"
end
create_makefile("ptmalloc_dump/ptmalloc_dump_track")
append_tidy_after_install
