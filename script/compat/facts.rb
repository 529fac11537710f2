# frozen_string_literal: true

# Prints, as JSON, what `rake compat` records about the system a run happens on: glibc and Ruby,
# whether libc carries its own .symtab, and where its debug symbols are. Runs with the chroot's own
# Ruby (2.7 and newer).
require "json"

def command(*args)
  IO.popen(args, err: File::NULL, &:read).to_s.scrub.strip
end

# The libc this very process has loaded, as the gem finds it.
def libc_path
  File.foreach("/proc/self/maps").map { |line| line.split[5] }.compact
      .find { |path| File.basename(path) =~ /\Alibc(\.so\.6|-[\d.]+\.so)\z/ }
end

def build_id(libc)
  command("readelf", "-n", libc)[/Build ID: (\h+)/, 1]
end

def debug_files(libc, id)
  candidates = []
  candidates << "/usr/lib/debug/.build-id/#{id[0, 2]}/#{id[2..]}.debug" if id
  link = command("readelf", "--string-dump=.gnu_debuglink", libc)[/\]\s+(\S+)/, 1]
  if link
    dir = File.dirname(File.realpath(libc))
    candidates += ["/usr/lib/debug#{dir}/#{link}", "#{dir}/.debug/#{link}"]
  end
  candidates.uniq.select { |path| File.exist?(path) }
end

libc = libc_path
id = build_id(libc)
puts JSON.pretty_generate(
  glibc: command("getconf", "GNU_LIBC_VERSION").split.last,
  libc6: command("dpkg-query", "-W", "-f=${Version}", "libc6"),
  libc6_dbg: command("dpkg-query", "-W", "-f=${Status} ${Version}", "libc6-dbg")[/install ok installed (\S+)/, 1],
  libc_path: libc,
  libc_symtab: command("readelf", "-S", "--wide", libc).match?(/\s\.symtab\s/),
  build_id: id,
  debug_files: debug_files(libc, id),
  ruby: RUBY_VERSION,
  ruby_description: RUBY_DESCRIPTION,
  gc_internal_constants: GC::INTERNAL_CONSTANTS,
  chromium: File.executable?("/usr/bin/chromium") && File.executable?("/usr/bin/chromedriver"),
  compiler: command("cc", "--version").lines.first.to_s.strip
)
