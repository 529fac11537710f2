# frozen_string_literal: true

require "fiddle"
require "fileutils"
require "tmpdir"
require "ptmalloc_dump"

Dir[File.join(__dir__, "support", "**", "*.rb")].sort.each { |f| require f }

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.expect_with(:rspec) { |c| c.syntax = :expect }
  config.order = :defined
  config.example_status_persistence_file_path = "spec/examples.txt"
  config.include SpecHelpers
  config.before(:example, :quiescent) { settle_threads }
  # ptrace (dumps of another process, gdb and gcore) under qemu-user, which does not emulate it: pending,
  # with the reason, so that the results count them
  config.before(:example, :ptrace) do
    skip "qemu-user does not emulate ptrace (another process's dump, gdb, gcore)" if SpecHelpers.qemu_user?
  end
  # Chromium under qemu-user: it aborts at start (its GPU process does not launch; --single-process ends
  # in a trap), so the report's pages are looked at in a browser on the host's own architecture only
  config.define_derived_metadata(:browser) do |meta|
    meta[:skip] = "Chromium does not run under qemu-user: it aborts at start" if SpecHelpers.qemu_user?
  end

  config.before(:suite) do
    # The first dump in a process creates the stream malloc_info() writes to; do it once up front so
    # examples see the steady state.
    # (under AddressSanitizer, rake spec:sanitize, malloc is not glibc's: nothing to warm up)
    Dir.mktmpdir { |d| PtmallocDump.dump(File.join(d, "warmup.dump")) } unless ENV["PTMALLOC_DUMP_ASAN"]
    GC.stress = true if ENV["PTMALLOC_DUMP_GC_STRESS"]
  end
end
