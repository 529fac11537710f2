# frozen_string_literal: true

# After `make install` the build's objects and its copy of the library are of no further use: an
# installed gem would otherwise keep megabytes of them in its ext/ folder (RubyGems cleans only before
# building). Appended to the Makefile create_makefile wrote in the current directory; not for the
# development build (the Rakefile sets PTMALLOC_DUMP_DEVELOPMENT), which keeps its objects so that a
# change recompiles only what it touches.
def append_tidy_after_install
  return if ENV["PTMALLOC_DUMP_DEVELOPMENT"]

  File.open("Makefile", "a") do |f|
    f.puts <<~MAKE

      # the build's leftovers, removed once the library is installed
      install: tidy-after-install
      tidy-after-install: install-so install-rb
      \t-$(Q)$(RM) $(OBJS) $(DLLIB) mkmf.log
      .PHONY: tidy-after-install
    MAKE
  end
end
