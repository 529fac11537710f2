# frozen_string_literal: true

require "rbconfig"

# The fast tier: C unit tests of the load direction on synthetic dumps built in memory (test/unit),
# then the specs tagged :unit, which start no process.
UNIT_SOURCES = Dir["test/unit/*.c", "ext/ptmalloc_dump/{format,analysis}/*.c"].sort
UNIT_BINARY = "tmp/unit/ptmd_unit"

file UNIT_BINARY => UNIT_SOURCES + Dir["test/unit/*.h", "ext/ptmalloc_dump/{format,analysis}/*.h"] do
  mkdir_p File.dirname(UNIT_BINARY)
  # the extension's flags (extconf.rb), warnings as errors; PTMALLOC_DUMP_SANITIZE as for the extension
  flags = RbConfig::CONFIG["CFLAGS"].split + %w[-Wall -Wextra -Werror -std=gnu11 -Wno-missing-field-initializers]
  flags += %W[-fsanitize=#{ENV['PTMALLOC_DUMP_SANITIZE']} -fno-sanitize-recover=all -g] if ENV["PTMALLOC_DUMP_SANITIZE"]
  sh RbConfig::CONFIG["CC"], *flags, "-Iext/ptmalloc_dump", *UNIT_SOURCES, "-lpng", "-lm", "-o", UNIT_BINARY
end

desc "The fast tier (under a minute, no process started): C unit tests of format/ and analysis/, specs tagged :unit"
task unit: [:compile, UNIT_BINARY] do
  sh UNIT_BINARY
  sh RbConfig.ruby, "-S", "rspec", "--tag", "unit", *Dir["spec/*_spec.rb"].sort
end
