# frozen_string_literal: true

# What both libraries' extconf.rb do: check the platform, set the flags and list the sources
# (sources.rb) from ext/ptmalloc_dump's folders.
require "mkmf"
require_relative "makefile_tidy"
require_relative "sources"

def fail_with(message)
  abort "\nptmalloc_dump cannot be built here: #{message}\n\n"
end

# The walker reads glibc's malloc structures of 64-bit Linux on x86-64 and aarch64 (capture/arch.h).
def check_platform
  fail_with("it needs Linux (found #{RbConfig::CONFIG['host_os']})") unless RbConfig::CONFIG["host_os"].include?("linux")
  unless RbConfig::CONFIG["host_cpu"] =~ /\A(x86_64|amd64|aarch64|arm64)\z/
    fail_with("it needs a 64-bit x86-64 or aarch64 (arm64) CPU (found #{RbConfig::CONFIG['host_cpu']})")
  end
  # glibc identifies itself here; musl (Alpine) has no gnu/libc-version.h.
  unless have_header("gnu/libc-version.h")
    fail_with("it needs glibc (musl and other C libraries have a different malloc); on Alpine use a Debian- or Ubuntu-based image")
  end
  # libc is located among the loaded objects with dl_iterate_phdr.
  fail_with("link.h is missing (install libc6-dev)") unless have_header("link.h")
  fail_with("dl_iterate_phdr is missing from libc") unless have_func("dl_iterate_phdr", "link.h")
  # mallinfo2 (glibc 2.33+) is one of the oracles a dump records; older glibc has only mallinfo.
  have_func("mallinfo2", "malloc.h")
  have_func("malloc_info", "malloc.h")
  have_library("dl", "dladdr")
  have_library("m", "log")
end

def set_flags
  # Ruby's own headers are system headers here: warnings are for this extension's code (Ruby 3.3's
  # ctype.h, for one, has unused parameters).
  $INCFLAGS = $INCFLAGS.gsub(/-I(\$\((?:arch_)?hdrdir\)\S*)/, '-isystem \\1')
  append_cflags(%w[-Wall -Wextra -std=gnu11 -fvisibility=hidden -Wno-missing-field-initializers])
  if (sanitizers = ENV["PTMALLOC_DUMP_SANITIZE"])
    # Builds for rake spec:sanitize: "undefined", or "address,undefined".
    append_cflags(%W[-fsanitize=#{sanitizers} -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g])
    $LDFLAGS << " -fsanitize=#{sanitizers}"
  elsif ENV["PTMALLOC_DUMP_DEBUG"]
    append_cflags(%w[-O0 -g3])
  end
end

# The sources, by direction (README, "How it works"): capture/ runs inside the worker and never
# allocates, format/ is the file and what both directions share, analysis/ is plain C over a loaded
# dump (what `rake fuzz` covers), bindings/ converts to and from Ruby. Includes name the folder.
def use_sources(library)
  sources = PtmallocDumpSources.of(library)
  src = PtmallocDumpSources::DIR
  $VPATH.concat(sources.map { |f| File.join(src, File.dirname(f)) }.uniq)
  $srcs = sources.map { |f| "#{File.basename(f)}.c" }
  $INCFLAGS << " -I#{src} -I#{File.join(src, '../ptmalloc_dump_track')}"
end
