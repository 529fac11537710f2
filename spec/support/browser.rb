# frozen_string_literal: true

require "json"
require "net/http"
require "socket"

# A minimal WebDriver client (chromedriver + Debian's chromium, headless) over Net::HTTP: enough to
# open a page, run a script, read the console log and take a screenshot.
class Browser
  CHROMIUM = ENV.fetch("CHROMIUM", "/usr/bin/chromium")
  CHROMEDRIVER = ENV.fetch("CHROMEDRIVER", "/usr/bin/chromedriver")

  def self.available?
    File.executable?(CHROMIUM) && File.executable?(CHROMEDRIVER)
  end

  def self.open(profile_dir)
    browser = new(profile_dir)
    yield browser
  ensure
    browser&.close
  end

  def initialize(profile_dir)
    @port = TCPServer.open("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    @driver = Process.spawn(CHROMEDRIVER, "--port=#{@port}", "--allowed-ips=127.0.0.1", %i[out err] => File::NULL)
    wait_ready
    caps = {
      browserName: "chrome",
      "goog:chromeOptions" => {
        binary: CHROMIUM,
        args: %W[--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking
                 --disable-component-update --disable-sync --no-first-run --disable-quic --user-data-dir=#{profile_dir}
                 --window-size=1400,1000]
      },
      "goog:loggingPrefs" => { browser: "ALL" }
    }
    @session = request(:post, "/session", capabilities: { alwaysMatch: caps })["sessionId"]
  end

  def visit(url)
    command(:post, "url", url: url)
  end

  # Runs JavaScript in the page and returns its result.
  def script(source)
    command(:post, "execute/sync", script: source, args: [])
  end

  # @return [Array<Hash>] console entries (level, message)
  def console
    command(:post, "se/log", type: "browser")
  end

  # @return [String] PNG bytes
  def screenshot
    command(:get, "screenshot").unpack1("m")
  end

  def close
    request(:delete, "/session/#{@session}") if @session
  rescue StandardError
    nil
  ensure
    if @driver
      Process.kill("TERM", @driver)
      Process.wait(@driver)
    end
    @driver = @session = nil
  end

  private

  def wait_ready
    deadline = Time.now + 30
    loop do
      return if request(:get, "/status").dig("ready")
    rescue SystemCallError, EOFError, Net::ReadTimeout
      raise "chromedriver did not start" if Time.now > deadline

      sleep 0.1
    end
  end

  def command(verb, path, body = nil)
    request(verb, "/session/#{@session}/#{path}", body)
  end

  def request(verb, path, body = nil)
    http = Net::HTTP.new("127.0.0.1", @port)
    http.read_timeout = 120
    req = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(verb).new(path)
    if body
      req["Content-Type"] = "application/json"
      req.body = JSON.dump(body)
    end
    res = JSON.parse(http.request(req).body)
    value = res.is_a?(Hash) && res.key?("value") ? res["value"] : res
    raise "WebDriver #{verb} #{path}: #{value['message']}" if value.is_a?(Hash) && value["error"]

    value
  end
end
