# frozen_string_literal: true

require "spec_helper"

# The symbol file is libc6-dbg's where it is installed; elsewhere one made from what glibc itself
# reveals (spec/support/libc_facts.rb), so that every lookup path runs either way.
RSpec.describe "finding main_arena", :quiescent do
  let(:debug_dir) { LibcFacts.debug_dir }
  let(:info) { PtmallocDump.libc_info(debug_dir: debug_dir) }
  let(:debug_file) { LibcFacts.symbol_file }

  it "agrees with the arena address glibc links into a chunk it frees" do
    dump = dump_and_load
    expect(dump.header[:main_arena]).to eq(LibcFacts.main_arena)
    expect(dump.header[:mp]).to eq(LibcFacts.mp)
  end

  it "agrees with gdb on &main_arena for the same process", :ptrace do
    path = File.join(tmpdir, "child.dump")
    code = <<~RUBY
      PtmallocDump.dump(#{path.inspect}, debug_dir: #{debug_dir.inspect})
      $stdout.puts "ready"
      $stdout.flush
      sleep
    RUBY
    Open3.popen3(RbConfig.ruby, "-I", SpecHelpers::LIB, "-rptmalloc_dump", "-e", code) do |stdin, stdout, _err, wait|
      expect(stdout.gets).to eq("ready\n")
      gdb, gdb_err, status = Open3.capture3("gdb", "-batch", "-nx", "-iex", "set debug-file-directory #{debug_dir}",
                                            "-p", wait.pid.to_s, "-ex", "p &main_arena")
      expect(status).to be_success, gdb_err
      # "(struct malloc_state *) 0x…" with libc6-dbg; an untyped pointer with the made symbol file
      address = gdb[/^\$1 = .*?\) (0x\h+)/, 1]
      expect(address).not_to be_nil, gdb
      expect(PtmallocDump.load(path).header[:main_arena]).to eq(Integer(address))
      expect(PtmallocDump.load(path).header[:symbol_source]).to eq(:build_id)
    ensure
      Process.kill("KILL", wait.pid)
      stdin.close
    end
  end

  it "finds the symbol file by build-id under the debug directory" do
    expect(info[:build_id]).to match(/\A\h{40}\z/)
    expect(info[:build_id]).to eq(LibcFacts.build_id)
    expect(info[:symbol_file]).to eq(debug_file)
    expect(debug_file).to end_with("/.build-id/#{info[:build_id][0, 2]}/#{info[:build_id][2..]}.debug")
    dump = dump_and_load(debug_dir: debug_dir)
    expect(dump.header[:symbol_source]).to eq(:build_id)
    expect(dump.header.values_at(:main_arena, :mp)).to eq([LibcFacts.main_arena, LibcFacts.mp])
    expect_valid_dump(dump)
  end

  it "follows .gnu_debuglink into <debugdir><libdir>/ when there is no .build-id link, checking the CRC" do
    libdir = File.dirname(File.realpath(info[:libc_path]))
    link_name = `readelf --string-dump=.gnu_debuglink #{info[:libc_path]} 2>/dev/null`.b[/\]\s+(\S+)/, 1]
    expect(link_name).not_to be_nil
    dir = File.join(tmpdir, "debug")
    FileUtils.mkdir_p(File.join(dir, libdir))
    FileUtils.cp(debug_file, File.join(dir, libdir, link_name))
    dump = dump_and_load(debug_dir: dir)
    expect(dump.header[:symbol_source]).to eq(:debuglink)
    expect(dump.header[:symbol_file]).to eq(File.join(dir, libdir, link_name))
    expect(dump.header[:main_arena]).to eq(LibcFacts.main_arena)
    expect_valid_dump(dump)
  end

  it "rejects a debuglink target whose CRC does not match" do
    libdir = File.dirname(File.realpath(info[:libc_path]))
    link_name = `readelf --string-dump=.gnu_debuglink #{info[:libc_path]} 2>/dev/null`.b[/\]\s+(\S+)/, 1]
    dir = File.join(tmpdir, "debug")
    FileUtils.mkdir_p(File.join(dir, libdir))
    File.binwrite(File.join(dir, libdir, link_name), "#{File.binread(debug_file)}tampered")
    expect { PtmallocDump.dump(File.join(tmpdir, "x.dump"), debug_dir: dir, symbols: :file) }
      .to raise_error(PtmallocDump::SymbolsNotFoundError)
  end

  it "raises SymbolsNotFoundError naming the build-id, the paths tried and the package when symbol files are required" do
    empty = File.join(tmpdir, "empty")
    Dir.mkdir(empty)
    target = File.join(tmpdir, "never.dump")
    expect { PtmallocDump.dump(target, debug_dir: empty, symbols: :file) }.to raise_error(PtmallocDump::SymbolsNotFoundError) { |e|
      expect(e.message).to include(info[:build_id])
      expect(e.message).to include(File.join(empty, ".build-id", info[:build_id][0, 2]))
      expect(e.message).to include("libc6-dbg")
      expect(e.message).to include("glibc #{info[:glibc_version]}")
    }
    expect(File.exist?(target)).to be(false)
    expect(Dir.children(tmpdir)).to eq(["empty"])
  end

  it "takes the debug directory from PTMALLOC_DUMP_DEBUG_DIR" do
    empty = File.join(tmpdir, "empty")
    Dir.mkdir(empty)
    _out, err, status = run_ruby("PtmallocDump.dump(#{File.join(tmpdir, 'x.dump').inspect}, symbols: :file)",
                                 env: { "PTMALLOC_DUMP_DEBUG_DIR" => empty })
    expect(status).not_to be_success
    expect(err).to include("SymbolsNotFoundError")
    expect(err).to include(empty)
  end

  it "finds main_arena by structure when there is no symbol file" do
    empty = File.join(tmpdir, "empty")
    Dir.mkdir(empty)
    dump = dump_and_load(debug_dir: empty)
    expect(dump.header[:symbol_source]).to eq(:heuristic)
    expect(dump.header[:main_arena]).to eq(LibcFacts.main_arena)
    expect(dump.header[:mp]).to eq(LibcFacts.mp)
    expect_valid_dump(dump)
  end

  it "rejects an unknown symbols: mode" do
    expect { PtmallocDump.dump(File.join(tmpdir, "x.dump"), symbols: :guess) }.to raise_error(ArgumentError, /symbols:/)
  end
end
