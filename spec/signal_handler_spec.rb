# frozen_string_literal: true

require "spec_helper"

RSpec.describe "PtmallocDump.install_signal_handler" do
  describe "checks its directory when it is installed" do
    it "makes a directory that does not exist, for this user only, and raises when it cannot be made" do
      missing = File.join(tmpdir, "heap", "dumps")
      # in a child: an installed handler stays installed for its process
      out, err, status = run_ruby(<<~RUBY)
        PtmallocDump.install_signal_handler("URG", dir: #{missing.dump}, log: File.open(File::NULL, "w"))
        Process.kill("URG", Process.pid)
        sleep 0.1 until Dir.children(#{missing.dump}).any? { |f| f.end_with?(".dump") }
        puts Dir.children(#{missing.dump}).grep(/\\.dump\\z/).size
      RUBY
      expect(status).to be_success, err
      expect(out.to_i).to eq(1) # the handler dumped into the directory it made
      expect(File.stat(missing).mode & 0o777).to eq(0o700)
      expect(File.stat(File.dirname(missing)).mode & 0o777).to eq(0o700)
      file = File.join(tmpdir, "file")
      File.write(file, "")
      expect { PtmallocDump.install_signal_handler("USR2", dir: File.join(file, "sub")) }
        .to raise_error(PtmallocDump::DumpDirectoryError,
                        %r{\Aptmalloc_dump: the dump directory #{Regexp.escape(file)}/sub does not exist and cannot be made: \S})
    end

    it "raises for a file, and for a symbolic link to a directory" do
      file = File.join(tmpdir, "file")
      File.write(file, "")
      expect { PtmallocDump.install_signal_handler("USR2", dir: file) }
        .to raise_error(PtmallocDump::DumpDirectoryError, /#{Regexp.escape(file)} is not a directory/)
      link = File.join(tmpdir, "link")
      File.symlink(Dir.tmpdir, link)
      expect { PtmallocDump.install_signal_handler("USR2", dir: link) }
        .to raise_error(PtmallocDump::DumpDirectoryError, /#{Regexp.escape(link)} is a symbolic link to #{Regexp.escape(Dir.tmpdir)}/)
    end

    it "raises for an unknown dump option and for the options the handler sets itself" do
      expect { PtmallocDump.install_signal_handler("USR2", dir: tmpdir, refs: true) }
        .to raise_error(ArgumentError, /unknown dump option\(s\) refs; known: debug_dir, symbols, ruby, references/)
      expect { PtmallocDump.install_signal_handler("USR2", dir: tmpdir, wait: true) }.to raise_error(ArgumentError, /wait/)
    end
  end

  it "says at install when the signal already has a Ruby or a native handler, and names it; a free one says nothing" do
    log = File.join(tmpdir, "worker.log")
    out, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      libc = Fiddle::Handle::DEFAULT
      # a native handler for WINCH, as a C extension would install it: getpid ignores its argument
      signal = Fiddle::Function.new(libc["signal"], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOIDP)
      signal.call(Signal.list.fetch("WINCH"), libc["getpid"])
      ran = []
      Signal.trap("URG") { ran << :theirs } # a server's own trap, as Puma's fork_worker sets it
      log = File.open(#{log.inspect}, "a")
      PtmallocDump.install_signal_handler("URG", dir: #{tmpdir.inspect}, log: log, fork: false)
      PtmallocDump.install_signal_handler("WINCH", dir: #{tmpdir.inspect}, log: log, fork: false)
      PtmallocDump.install_signal_handler("USR1", dir: #{tmpdir.inspect}, log: log, fork: false)
      Process.kill("URG", Process.pid)
      200.times { break if ran.any?; sleep 0.05 }
      puts ran.inspect
    RUBY
    expect(status).to be_success, err
    expect(out).to eq("[:theirs]\n") # the previous Ruby handler still runs, after the dump
    lines = File.readlines(log)
    expect(lines.size).to eq(3)
    expect(lines[0]).to match(/\Aptmalloc_dump: SIGURG already had a Ruby handler \(a Proc at -e:7\) that runs after each dump, /)
    expect(lines[1]).to match(%r{\Aptmalloc_dump: SIGWINCH already had a native handler \(\w*getpid in \S*/libc\.so\.6\), which Signal\.trap replaces: it no longer runs; })
    expect(lines[2]).to match(/\Aptmalloc_dump: wrote \S+: heap /) # the URG dump; USR1 had no handler to mention
  end

  it "snapshots by default, passes dump options by name, and logs the pause, the walk and the file" do
    log = File.join(tmpdir, "worker.log")
    out, err, status = run_ruby(<<~RUBY)
      log = File.open(#{log.inspect}, "a")
      PtmallocDump.install_signal_handler("USR2", dir: #{tmpdir.inspect}, log: log, references: true)
      PtmallocDump.install_signal_handler("USR1", dir: #{tmpdir.inspect}, log: log, fork: false, symbols: :heuristic, ruby: false)
      keep = Array.new(50_000) { |i| "x" * (30 + i % 200) }
      Process.kill("USR2", Process.pid)
      200.times { break if File.read(#{log.inspect}).include?(" wrote "); sleep 0.05 }
      Process.kill("USR1", Process.pid)
      puts keep.size
    RUBY
    expect(status).to be_success, err
    expect(out).to eq("50000\n")
    lines = File.readlines(log)
    expect(lines.size).to eq(3)
    expect(lines[0]).to match(%r{\Aptmalloc_dump: snapshot process (\d+) is writing (\S+/ptmalloc-\d+-[\d-]+\.dump); the worker paused \d+\.\d ms \(signal to return\)\n\z})
    snapshot = lines[0][/writing (\S+);/, 1]
    expect(lines[1]).to match(/\Aptmalloc_dump: snapshot process \d+ wrote #{Regexp.escape(snapshot)} in \d+\.\d ms \(walk and write\)\n\z/)
    expect(lines[2]).to match(/\Aptmalloc_dump: wrote (\S+): heap .+, walk (\d+\.\d) ms; the worker paused (\d+\.\d) ms \(signal to return\)\n\z/)
    walk, pause = lines[2].match(/walk (\d+\.\d) ms; the worker paused (\d+\.\d) ms/).captures.map(&:to_f)
    expect(pause).to be >= walk # the pause holds the walk
    in_process = lines[2][/wrote (\S+):/, 1]

    snap = PtmallocDump.load(snapshot)
    expect(snap.header[:fork_snapshot]).to be(true)
    expect(snap.ruby.summary[:references]).to be(true) # references: true reached the snapshot
    inproc = PtmallocDump.load(in_process)
    expect(inproc.header[:fork_snapshot]).to be(false)
    expect(inproc.header[:symbol_source]).to eq(:heuristic) # symbols: :heuristic reached it
    expect(inproc.header[:ruby_layer]).to eq(:off) # and ruby: false
    [snap, inproc].each { |d| expect_valid_dump(d) }
  end
end
